//! Go-style durations (`"10s"`, `"1m30s"`, `"250ms"`, `"1h"`), the way Consul
//! reads and prints them.

use std::time::Duration;

/// Parses a Go duration string (`"1h2m3.5s"`, `"300ms"`, `"0"`).
pub fn parse_go_duration(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    if s.is_empty() {
        return Err(format!("invalid duration {input:?}"));
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.starts_with('-') {
        return Err(format!(
            "invalid duration {input:?}: negative durations are not allowed"
        ));
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    let bytes = s.as_bytes();
    let out_of_range = || format!("invalid duration {input:?}: out of range");
    // Whole nanoseconds in integers, as Go's `time.ParseDuration` keeps
    // them: a float would round durations past 2^53 ns (about 104 days).
    let mut total: u128 = 0;
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let whole = &s[start..i];
        let mut fraction = "";
        if i < bytes.len() && bytes[i] == b'.' {
            i += 1;
            let fraction_start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            fraction = &s[fraction_start..i];
        }
        if whole.is_empty() && fraction.is_empty() {
            return Err(format!("invalid duration {input:?}"));
        }
        let unit_start = i;
        while i < bytes.len() && !(bytes[i].is_ascii_digit() || bytes[i] == b'.') {
            i += 1;
        }
        let unit: u128 = match &s[unit_start..i] {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(format!("invalid duration {input:?}: missing unit")),
            other => {
                return Err(format!(
                    "invalid duration {input:?}: unknown unit {other:?}"
                ))
            }
        };
        let mut value: u128 = 0;
        for digit in whole.bytes() {
            value = value
                .checked_mul(10)
                .and_then(|v| v.checked_add(u128::from(digit - b'0')))
                .filter(|v| *v <= i64::MAX as u128)
                .ok_or_else(out_of_range)?;
        }
        let mut nanos = value.checked_mul(unit).ok_or_else(out_of_range)?;
        // The fraction, to the nanosecond (digits past it cannot matter).
        let mut scale: u128 = 1;
        let mut digits: u128 = 0;
        for digit in fraction.bytes().take(18) {
            digits = digits * 10 + u128::from(digit - b'0');
            scale *= 10;
        }
        nanos += digits * unit / scale;
        total = total.checked_add(nanos).ok_or_else(out_of_range)?;
        if total > i64::MAX as u128 {
            return Err(out_of_range());
        }
    }
    Ok(Duration::from_nanos(total as u64))
}

/// A duration given as a JSON number of nanoseconds (as Consul's decoder
/// accepts): a whole number from 0 to Go's largest duration (`i64::MAX`
/// ns, about 292 years), so it formats and parses back the same.
pub fn from_json_nanos(n: &serde_json::Number) -> Result<Duration, String> {
    n.as_u64()
        .filter(|n| *n <= i64::MAX as u64)
        .map(Duration::from_nanos)
        .ok_or_else(|| {
            format!(
                "invalid duration {n}: expected whole nanoseconds from 0 to {}",
                i64::MAX
            )
        })
}

/// Formats a duration the way Go's `time.Duration.String()` does
/// (`"10s"`, `"1m30s"`, `"1.5s"`, `"250ms"`, `"0s"`).
pub fn format_go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", trim_fraction(nanos as f64 / 1e3));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", trim_fraction(nanos as f64 / 1e6));
    }
    let hours = nanos / 3_600_000_000_000;
    let rem = nanos % 3_600_000_000_000;
    let minutes = rem / 60_000_000_000;
    let rem = rem % 60_000_000_000;
    let seconds = rem as f64 / 1e9;
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&format!("{}s", trim_fraction(seconds)));
    out
}

fn trim_fraction(value: f64) -> String {
    let text = format!("{value:.9}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    text.to_string()
}

/// Serde adapter for an optional duration written as a Go string; it also
/// accepts a bare number of nanoseconds, as Consul's decoder does.
pub mod opt_go {
    use super::*;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Serializes as a Go duration string.
    pub fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_str(&format_go_duration(*d)),
            None => s.serialize_none(),
        }
    }

    /// Deserializes from a Go duration string or nanoseconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let value = Option::<serde_json::Value>::deserialize(d)?;
        match value {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) if s.is_empty() => Ok(None),
            Some(serde_json::Value::String(s)) => parse_go_duration(&s)
                .map(Some)
                .map_err(serde::de::Error::custom),
            Some(serde_json::Value::Number(n)) => from_json_nanos(&n)
                .map(Some)
                .map_err(serde::de::Error::custom),
            Some(other) => Err(serde::de::Error::custom(format!(
                "invalid duration {other}: expected a string such as \"10s\""
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn every_duration_formats_and_parses_back_exactly(nanos in 0..=i64::MAX as u64) {
            let d = Duration::from_nanos(nanos);
            proptest::prop_assert_eq!(parse_go_duration(&format_go_duration(d)), Ok(d));
        }
    }

    #[test]
    fn out_of_range_durations_are_refused() {
        assert!(parse_go_duration("2562047h47m16.854775807s").is_ok());
        for bad in [
            "2562047h47m16.854775808s",
            "9999999999999999999999h",
            "99999999999h",
        ] {
            assert!(
                parse_go_duration(bad).unwrap_err().contains("out of range"),
                "{bad}"
            );
        }
        let too_big = serde_json::Number::from(i64::MAX as u64 + 1);
        assert!(from_json_nanos(&too_big).is_err());
        assert!(from_json_nanos(&serde_json::Number::from(-1)).is_err());
    }

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_go_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_go_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(
            parse_go_duration("1.5s").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(
            parse_go_duration("250ms").unwrap(),
            Duration::from_millis(250)
        );
        assert_eq!(
            parse_go_duration("72h").unwrap(),
            Duration::from_secs(72 * 3600)
        );
        assert_eq!(parse_go_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_go_duration("10").is_err());
        assert!(parse_go_duration("ten seconds").is_err());
        assert!(parse_go_duration("-5s").is_err());
        assert!(parse_go_duration("").is_err());
        assert!(parse_go_duration("5x").is_err());
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(format_go_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_go_duration(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(format_go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_go_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_go_duration(Duration::ZERO), "0s");
    }
}
