//! The process table, read from /proc: which processes still run (zombies count as
//! ended) and which carry a given environment variable (every process a job's command
//! started inherits `JOBQUEUE_JOB_ID` and `JOBQUEUE_WORKER_ID`, however deep); and a
//! command run to its end with `input` on its stdin (`output_with_stdin`).

/// Running: not gone, and not a zombie waiting to be reaped.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Running processes whose environment holds `name=value`.
pub fn with_env(name: &str, value: &str) -> Vec<i32> {
    let marker = format!("{name}={value}");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == marker.as_bytes()))
                && alive(pid)
        })
        .collect()
}

/// Run `cmd` to its end with `input` on its stdin, stdout and stderr captured.
pub fn output_with_stdin(cmd: &mut std::process::Command, input: &[u8]) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the command");
    child
        .stdin
        .take()
        .expect("stdin piped")
        .write_all(input)
        .expect("write the command's stdin");
    child.wait_with_output().expect("wait for the command")
}
