"""Apply the lab's stand-in patch: refuse a file that does not compile, record its sha256."""

import hashlib
import sys

source, stamp = sys.argv[1], sys.argv[2]
text = open(source, encoding="utf-8").read()
compile(text, source, "exec")
with open(stamp, "w", encoding="utf-8") as fh:
    fh.write(hashlib.sha256(text.encode()).hexdigest() + "\n")
print(f"patched: {source}")
