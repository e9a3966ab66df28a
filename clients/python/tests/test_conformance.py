"""tests/conformance/'s cases, with their script calls sent by this package
(conformance_package.py): the package calls every script as the protocol says."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("mode", ["standalone", "cluster"])
def test_the_conformance_cases_pass_through_the_package_script_layer(mode):
    env = {**os.environ, "JOBQUEUE_CONFORMANCE_MODE": mode}
    out = subprocess.run([sys.executable, str(HERE / "conformance_package.py")], capture_output=True, text=True,
                         timeout=600, env=env)
    text = out.stdout + out.stderr
    failures = [l for l in text.splitlines() if l.startswith("FAIL")]
    m = re.search(r"conformance via the Python package(?: \(\w+\))?: (\d+) passed, (\d+) failed", text)
    calls = re.search(r"script calls through the package: (\d+)", text)
    assert m and calls, text[-3000:]
    assert int(m.group(2)) == 0 and out.returncode == 0, f"failed cases {failures}:\n{text[-5000:]}"
    assert int(m.group(1)) >= 80 and int(calls.group(1)) >= 1000, (m.group(0), calls.group(0))
