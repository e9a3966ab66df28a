//! `jobqueue crd`: print the JobQueue CustomResourceDefinition.

use std::io::Write;

pub const EXAMPLES: &str = "\
Examples:
  jobqueue crd | kubectl apply -f -      # install or update the CRD
  jobqueue crd > jobqueue-crd.yaml       # to review or commit it";

/// Print the CRD YAML to stdout (`jobqueue crd | kubectl apply -f -`).
pub fn run() -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(crate::crd::crd_yaml().as_bytes())?;
    out.flush()?;
    Ok(())
}
