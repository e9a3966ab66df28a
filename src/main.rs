fn main() {
    // A per-job supervisor (`jobqueue __supervise …`, started by `worker --exec`) runs
    // before any runtime: one thread, signals taken synchronously.
    if let Some(code) = jobqueue::worker::supervisor::run_if_asked() {
        std::process::exit(code);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("start the async runtime");
    runtime.block_on(async {
        let cli = jobqueue::cli::parse();
        if let Err(err) = jobqueue::cli::run(cli).await {
            if jobqueue::cli::stdout_closed(&err) {
                // `jobqueue peek | head -1`: the reader has what it wanted.
                std::process::exit(jobqueue::cli::exit::OK);
            }
            // One clear line: what failed, and why.
            eprintln!("error: {}", jobqueue::cli::error_line(&err));
            std::process::exit(jobqueue::cli::exit_code(&err));
        }
    });
}
