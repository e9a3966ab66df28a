use clap::Parser;

#[tokio::main]
async fn main() {
    let cli = jobqueue::cli::Cli::parse();
    if let Err(err) = jobqueue::cli::run(cli).await {
        // One clear line: what failed, and why.
        eprintln!("error: {}", jobqueue::cli::error_line(&err));
        std::process::exit(jobqueue::cli::exit_code(&err));
    }
}
