"""A node raises its soft limit on open files to the hard one (every segment keeps a file
open, as Kafka's do, and many systems start processes at 1,024)."""

import resource
import subprocess
import sys


def test_a_node_raises_its_open_file_limit_to_the_hard_one():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(soft, hard, 256)

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))

    script = ("import resource\nfrom broker.cli import _raise_open_file_limit\n"
              "_raise_open_file_limit()\n"
              "print(*resource.getrlimit(resource.RLIMIT_NOFILE))")
    out = subprocess.run([sys.executable, "-c", script], preexec_fn=lower, check=True,
                         capture_output=True, text=True).stdout.split()
    wanted = hard if hard != resource.RLIM_INFINITY else 1 << 20
    assert [int(n) for n in out] == [wanted, hard]
