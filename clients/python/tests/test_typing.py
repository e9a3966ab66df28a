"""The package is typed (py.typed): mypy --strict finds nothing in it."""
import subprocess
import sys
from pathlib import Path

import jobqueue


def test_the_package_passes_mypy_strict():
    package = Path(jobqueue.__file__).resolve().parent
    assert (package / "py.typed").is_file()
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "-p", "jobqueue"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
