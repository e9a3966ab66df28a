//! Durations as people type and read them: one grammar for every flag of the command
//! line and the operator, and one way to print them in logs, output and status messages.
//!
//! Written like Go durations: a sequence of `<number><unit>` parts, such as `500ms`,
//! `1m30s`, `1.5s`, `2h` or `1h2m3.5s`. Units are `µs` (or `us`), `ms`, `s`, `m`, `h` and
//! `d` (a day of 24 h). A bare `0` is zero; any other bare number is refused, because `5`
//! could mean seconds or milliseconds.

use std::time::Duration;

const NANOS_PER_UNIT: [(&str, u128); 7] = [
    ("µs", 1_000),
    ("us", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60 * 1_000_000_000),
    ("h", 3_600 * 1_000_000_000),
    ("d", 86_400 * 1_000_000_000),
];

const EXAMPLES: &str = "write e.g. 500ms, 5s, 2m, 1h";

/// The longest duration that fits (`u64::MAX` ns, about 584 years), said in days.
const LONGEST: &str = "213503d";

/// Parse a duration such as `500ms`, `1m30s`, `1.5s`, `2h` or `7d`; `0` alone is zero.
/// The error says what is wrong and how to write it.
pub fn parse(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err(format!("empty duration: {EXAMPLES}"));
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.starts_with('-') {
        return Err(format!("{text:?}: negative durations are not allowed"));
    }
    let mut total: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number_len == 0 {
            return Err(format!("{text:?} is not a duration: {EXAMPLES}"));
        }
        let number = &rest[..number_len];
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let digits_ok = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
        if (whole.is_empty() && fraction.is_empty()) || !digits_ok(fraction) {
            return Err(format!("{text:?} is not a duration: bad number {number:?}"));
        }
        let per_unit = match NANOS_PER_UNIT.iter().find(|(name, _)| *name == unit) {
            Some(&(_, nanos)) => nanos,
            None if unit.is_empty() => {
                return Err(format!(
                    "{text:?} has no unit: write e.g. {number}s or {number}ms"
                ));
            }
            None => {
                return Err(format!(
                    "{text:?}: unknown unit {unit:?} (use ms, s, m, h, d or µs)"
                ));
            }
        };
        let too_long = || format!("{text:?} is too long (the longest is {LONGEST})");
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| too_long())?
        };
        // Digits beyond a nanosecond are dropped.
        let mut fraction_nanos = 0u128;
        let mut scale = per_unit;
        for digit in fraction.bytes().take(20) {
            scale /= 10;
            fraction_nanos += u128::from(digit - b'0') * scale;
        }
        total = whole
            .checked_mul(per_unit)
            .and_then(|n| n.checked_add(fraction_nanos))
            .and_then(|n| n.checked_add(total))
            .ok_or_else(too_long)?;
    }
    let nanos = u64::try_from(total)
        .map_err(|_| format!("{text:?} is too long (the longest is {LONGEST})"))?;
    Ok(Duration::from_nanos(nanos))
}

/// A duration for people, which [`parse`] reads back: `0s`, `850µs`, `12ms`, `1.5s`,
/// `1.94s`, `1m30s`, `15m`, `2h`, `1h2m5s`, `7d`. Precise to the microsecond below a
/// millisecond, to the millisecond below a second, to 10 ms below a minute (two decimals,
/// truncated: a p99 reads `1.94s`, not `1.945s`) and to the second above; parts that are
/// zero are left out. Pass `{}ms` instead where a program must read the exact value.
pub fn format(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    let ms = d.as_millis();
    if ms == 0 {
        return format!("{}µs", d.as_micros());
    }
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    if ms < 60_000 {
        let hundredths = format!("{:02}", ms % 1_000 / 10);
        let hundredths = hundredths.trim_end_matches('0');
        return match hundredths {
            "" => format!("{}s", ms / 1_000),
            _ => format!("{}.{hundredths}s", ms / 1_000),
        };
    }
    let mut out = String::new();
    let mut secs = d.as_secs();
    for (unit, size) in [("d", 86_400u64), ("h", 3_600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;
    const SECS: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn durations_parse() {
        let cases = [
            ("500ms", MS(500)),
            ("5s", SECS(5)),
            ("90s", SECS(90)),
            ("2m", SECS(120)),
            ("1h", SECS(3_600)),
            ("2h", SECS(7_200)),
            ("7d", SECS(604_800)),
            ("1m30s", SECS(90)),
            ("1.5s", MS(1_500)),
            ("1h2m3.5s", MS(3_723_500)),
            ("2s500ms", MS(2_500)),
            (".5s", MS(500)),
            ("1.5ms", Duration::from_micros(1_500)),
            ("850µs", Duration::from_micros(850)),
            ("850us", Duration::from_micros(850)),
            ("0.1234567891s", Duration::from_nanos(123_456_789)),
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("0ms", Duration::ZERO),
            (" 10s ", SECS(10)),
            ("18446744073s", SECS(18_446_744_073)),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_durations_say_why() {
        let cases = [
            ("", "empty duration: write e.g. 500ms, 5s, 2m, 1h"),
            ("  ", "empty duration: write e.g. 500ms, 5s, 2m, 1h"),
            ("5", "\"5\" has no unit: write e.g. 5s or 5ms"),
            ("30", "\"30\" has no unit: write e.g. 30s or 30ms"),
            ("1m30", "\"1m30\" has no unit: write e.g. 30s or 30ms"),
            (
                "5x",
                "\"5x\": unknown unit \"x\" (use ms, s, m, h, d or µs)",
            ),
            (
                "5 s",
                "\"5 s\": unknown unit \" s\" (use ms, s, m, h, d or µs)",
            ),
            (
                "5ns",
                "\"5ns\": unknown unit \"ns\" (use ms, s, m, h, d or µs)",
            ),
            ("s", "\"s\" is not a duration: write e.g. 500ms, 5s, 2m, 1h"),
            ("-5s", "\"-5s\": negative durations are not allowed"),
            (
                "1.2.3s",
                "\"1.2.3s\" is not a duration: bad number \"1.2.3\"",
            ),
            (".s", "\".s\" is not a duration: bad number \".\""),
            (
                "18446744074s",
                "\"18446744074s\" is too long (the longest is 213503d)",
            ),
            (
                "999999999999999999999999999999999999999d",
                "\"999999999999999999999999999999999999999d\" is too long (the longest is 213503d)",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text), Err(want.to_string()), "{text}");
        }
    }

    #[test]
    fn durations_format() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(500), "0µs"),
            (Duration::from_micros(850), "850µs"),
            (Duration::from_micros(1_500), "1ms"),
            (MS(12), "12ms"),
            (MS(999), "999ms"),
            (MS(1_000), "1s"),
            (MS(1_500), "1.5s"),
            (MS(1_234), "1.23s"),
            (MS(1_945), "1.94s"),
            (MS(2_050), "2.05s"),
            (MS(2_005), "2s"),
            (SECS(2), "2s"),
            (SECS(30), "30s"),
            (MS(59_999), "59.99s"),
            (SECS(90), "1m30s"),
            (MS(90_500), "1m30s"),
            (SECS(125), "2m5s"),
            (SECS(900), "15m"),
            (SECS(3_600), "1h"),
            (SECS(3_605), "1h5s"),
            (SECS(3_725), "1h2m5s"),
            (SECS(86_400), "1d"),
            (SECS(604_800), "7d"),
            (SECS(90_000), "1d1h"),
        ];
        for (d, want) in cases {
            assert_eq!(format(d), want, "{d:?}");
        }
    }

    /// What the operator's status messages and the CLI printed before the two formatters
    /// became this one, and still print.
    #[test]
    fn status_and_cli_outputs_read_as_before() {
        let cases = [
            (Duration::from_micros(850), "850µs"),
            (MS(12), "12ms"),
            (MS(100), "100ms"),
            (MS(1_500), "1.5s"),
            (SECS(2), "2s"),
            (SECS(30), "30s"),
            (SECS(125), "2m5s"),
            (SECS(2 * 60), "2m"),
            (SECS(15 * 60), "15m"),
            (SECS(3_725), "1h2m5s"),
            (SECS(604_800), "7d"),
        ];
        for (d, want) in cases {
            assert_eq!(format(d), want, "{d:?}");
        }
    }

    /// Every value any flag accepted before the two parsers became this one.
    #[test]
    fn what_either_old_parser_accepted_still_parses() {
        for text in [
            "500ms", "30s", "2m", "1h", "1m30s", "5s", "7d", "1.5s", "0", "0s", " 10s ", "2s500ms",
            "100ms", "700ms",
        ] {
            assert!(parse(text).is_ok(), "{text}");
        }
    }

    #[test]
    fn what_is_formatted_parses_back() {
        for text in [
            "0s", "850µs", "12ms", "500ms", "1.5s", "1.94s", "2.05s", "5s", "1m30s", "2m", "15m",
            "1h", "1h2m5s", "7d", "1d1h",
        ] {
            assert_eq!(format(parse(text).unwrap()), text);
        }
        // A duration as precise as its format survives the trip.
        let mut ms = 1u64;
        while ms < 40 * 86_400_000 {
            let precision = match ms {
                0..1_000 => 1,
                1_000..60_000 => 10,
                _ => 1_000,
            };
            let d = MS(ms / precision * precision);
            assert_eq!(parse(&format(d)), Ok(d), "{d:?}");
            ms = ms * 3 + 1;
        }
    }
}
