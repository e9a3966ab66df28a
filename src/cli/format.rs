//! Writing the values people read: latencies, times, ages, payloads (durations are
//! [`crate::duration`]'s).

use std::time::Duration;

use crate::queue::JobId;

/// A latency for reading: `740µs`, `12ms`, `1.24s`.
pub fn format_latency(d: Duration) -> String {
    let us = d.as_micros();
    if us < 1_000 {
        format!("{us}µs")
    } else if us < 10_000 {
        format!("{:.1}ms", us as f64 / 1000.0)
    } else if us < 1_000_000 {
        format!("{}ms", us / 1000)
    } else {
        format!("{:.2}s", us as f64 / 1e6)
    }
}

/// Milliseconds since the epoch as `YYYY-MM-DD HH:MM:SS` in UTC.
pub fn format_epoch_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian calendar).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// How long ago `then_ms` was at `now_ms`, coarsely: `3s`, `5m`, `2h`, `4d`.
pub fn format_age(now_ms: i64, then_ms: i64) -> String {
    let secs = (now_ms - then_ms).max(0) / 1000;
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7_200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// A payload on one line: invalid UTF-8 and control characters escaped, cut to `width`
/// characters with `…`.
pub fn preview(payload: &[u8], width: usize) -> String {
    let text = escape(payload, false);
    if text.chars().count() <= width {
        return text;
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// A payload for a terminal: invalid UTF-8 bytes as `\xNN`, control characters escaped
/// (newlines and tabs kept when `keep_lines`).
pub fn escape(payload: &[u8], keep_lines: bool) -> String {
    let mut out = String::with_capacity(payload.len());
    for chunk in payload.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' | '\t' if keep_lines => out.push(c),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\\' if !keep_lines => out.push_str("\\\\"),
                c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// A job as JSON names its id as escaped text (`"id"`); an id that is not UTF-8 also
/// gets its exact bytes as hex (`"id_hex"`), since the escaped text can be ambiguous.
pub fn add_id_hex(value: &mut serde_json::Value, id: &JobId) {
    if id.as_str().is_none()
        && let Some(obj) = value.as_object_mut()
    {
        obj.insert("id_hex".into(), hex::encode(id.as_bytes()).into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_read_well() {
        assert_eq!(format_latency(Duration::from_micros(740)), "740µs");
        assert_eq!(format_latency(Duration::from_micros(2_500)), "2.5ms");
        assert_eq!(format_latency(Duration::from_millis(12)), "12ms");
        assert_eq!(format_latency(Duration::from_millis(1_240)), "1.24s");
    }

    #[test]
    fn epoch_times_are_utc_dates() {
        assert_eq!(format_epoch_ms(0), "1970-01-01 00:00:00");
        assert_eq!(format_epoch_ms(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(format_epoch_ms(1_735_689_599_999), "2024-12-31 23:59:59");
    }

    #[test]
    fn ages_are_coarse() {
        assert_eq!(format_age(10_000, 7_000), "3s");
        assert_eq!(format_age(600_000, 0), "10m");
        assert_eq!(format_age(3 * 86_400_000, 0), "3d");
        assert_eq!(format_age(0, 5_000), "0s");
    }

    #[test]
    fn previews_escape_and_cut() {
        assert_eq!(preview(b"hello", 10), "hello");
        assert_eq!(preview(b"a\nb\x00c", 20), "a\\nb\\u{0}c");
        assert_eq!(preview(b"\xff\xfeok", 20), "\\xff\\xfeok");
        assert_eq!(preview(b"abcdefghij", 5), "abcd…");
        assert_eq!(escape(b"line1\nline2\t\x1b", true), "line1\nline2\t\\u{1b}");
    }
}
