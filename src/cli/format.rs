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

/// An error text on one line, its end kept rather than its start: a command's stderr
/// tail ends with the error (`exit code 1; stderr: …Traceback … ValueError: bad id`).
/// A `; stderr: ` head stays whole when it fits, so the exit code is still seen.
pub fn preview_end(text: &str, width: usize) -> String {
    let text = text.trim_end();
    let full = escape(text.as_bytes(), false);
    if full.chars().count() <= width {
        return full;
    }
    let (head, rest) = match text.split_once("; stderr: ") {
        Some((head, rest)) => (
            format!("{}; stderr: ", escape(head.as_bytes(), false)),
            rest,
        ),
        None => (String::new(), text),
    };
    let head_len = head.chars().count();
    // Keep room for at least half the width of the tail.
    let (head, room) = if head_len + width / 2 <= width {
        (head, width - head_len)
    } else {
        (String::new(), width)
    };
    let rest = escape(rest.trim_start_matches('…').as_bytes(), false);
    let chars: Vec<char> = rest.chars().collect();
    let keep = room.saturating_sub(1);
    let tail: String = chars[chars.len().saturating_sub(keep)..].iter().collect();
    format!("{head}…{tail}")
}

/// `1 dead job`, `2 dead jobs`: a count and its noun in the right number (the nouns
/// the CLI counts all take a plain `s`).
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// A long operation's progress line: `redriving: 12000/50000 dead jobs (24%), 8400/s`,
/// or without a known total `enqueueing: 12000 jobs, 8400/s`.
pub fn progress_line(
    doing: &str,
    done: u64,
    total: Option<u64>,
    noun: &str,
    elapsed: Duration,
) -> String {
    let mut line = match total {
        Some(total) => {
            let pct = (done.saturating_mul(100)).checked_div(total).unwrap_or(100);
            format!("{doing}: {done}/{} ({pct}%)", count(total, noun))
        }
        None => format!("{doing}: {}", count(done, noun)),
    };
    let secs = elapsed.as_secs_f64();
    if secs >= 0.001 {
        line.push_str(&format!(", {:.0}/s", done as f64 / secs));
    }
    line
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

/// A job as JSON names its id (`"id"`: the id itself when it is UTF-8, else its `hex:`
/// form); an id that text output shows as `hex:…` (not UTF-8, a control character, or
/// text beginning with `hex:`) also gets its exact bytes as hex (`"id_hex"`).
pub fn add_id_hex(value: &mut serde_json::Value, id: &JobId) {
    if !id.is_plain()
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

    #[test]
    fn error_previews_keep_the_end() {
        assert_eq!(preview_end("exit code 1\n", 40), "exit code 1");
        let long = format!(
            "exit code 1; stderr: …{}\nValueError: bad id",
            "x".repeat(200)
        );
        let shown = preview_end(&long, 50);
        assert_eq!(shown.chars().count(), 50, "{shown}");
        assert!(shown.starts_with("exit code 1; stderr: …"), "{shown}");
        assert!(shown.ends_with("x\\nValueError: bad id"), "{shown}");
        let plain = format!("{}the end", "y".repeat(100));
        assert_eq!(preview_end(&plain, 10), "…yythe end");
    }

    #[test]
    fn counts_agree_with_their_noun() {
        assert_eq!(count(0, "dead job"), "0 dead jobs");
        assert_eq!(count(1, "dead job"), "1 dead job");
        assert_eq!(count(2, "id"), "2 ids");
    }

    #[test]
    fn progress_lines_show_done_total_and_rate() {
        let two = Duration::from_secs(2);
        assert_eq!(
            progress_line("redriving", 500, Some(2000), "dead job", two),
            "redriving: 500/2000 dead jobs (25%), 250/s"
        );
        assert_eq!(
            progress_line("enqueueing", 1, None, "job", two),
            "enqueueing: 1 job, 0/s"
        );
        assert_eq!(
            progress_line("purging", 0, Some(0), "dead job", Duration::ZERO),
            "purging: 0/0 dead jobs (100%)"
        );
    }
}
