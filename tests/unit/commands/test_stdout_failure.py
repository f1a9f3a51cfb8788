"""Standard output that cannot take the text (`> /dev/full`): one line on stderr and exit 2, never a traceback.

Exit 1 means findings; a command whose output cannot be written is a setup failure. A reader that leaves
early (`| head`) stays quiet, as before.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

COMPACTSIM = str(Path(sys.executable).parent / "compactsim")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
@pytest.mark.parametrize("argv", [["list"], ["list", "--json"], ["show", "no-compaction"]])
def test_a_full_stdout_is_exit_2_with_one_line(argv: list[str]):
    with open("/dev/full", "w") as full:
        proc = subprocess.run([COMPACTSIM, *argv], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (2, "compactsim: cannot write to standard output: No space left on device\n")


def test_a_reader_that_leaves_early_is_not_an_error():
    proc = subprocess.run(f"{COMPACTSIM} list | head -c 10 > /dev/null; echo ${{PIPESTATUS[0]}}", shell=True,
                          executable="/bin/bash", capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() in ("0", "141") and "Traceback" not in proc.stderr
