"""A stand-in for pip's get-pip.py, the script ansible-test downloads to put pip into each
of its empty virtual environments, from a host these machines cannot reach
(ci-files.testing.ansible.com). ansible-test runs the file it finds in its cache with
get-pip.py's arguments (pip install options and packages, e.g. `pip==25.2`, plus
--no-setuptools / --no-wheel): this one installs the pip wheel bundled with the running
Python (ensurepip), then `pip install`s the packages asked for from the configured index.

tests/sanity/run.sh copies it into ansible-test's cache under the name ansible-test looks for.
"""

import ensurepip
import subprocess
import sys

GET_PIP_ONLY = ("--no-setuptools", "--no-wheel")  # get-pip.py's own flags; its default installs neither here


def main() -> int:
    ensurepip.bootstrap(upgrade=True)
    args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY]
    return subprocess.call([sys.executable, "-m", "pip", "install", "--upgrade", *args])


if __name__ == "__main__":
    sys.exit(main())
