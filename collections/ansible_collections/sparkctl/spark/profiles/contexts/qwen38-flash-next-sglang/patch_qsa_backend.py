"""Route QSA's varlen attention to the Triton fallback when the GPU is not sm_100-class.

Idempotent: a second run finds the marker and changes nothing. Exits non-zero when the
function it wraps is not found, so a base image that moved the code fails the build."""

import re
import sys

MARKER = "# sparkctl: sm_121 Triton fallback"
WRAPPER = f'''

{MARKER}
_sparkctl_stock_resolve_flash_attn_varlen_func = _resolve_flash_attn_varlen_func


def _resolve_flash_attn_varlen_func(*args, **kwargs):
    from sglang.srt.utils import is_sm100_supported

    if not is_sm100_supported():
        from sglang.srt.layers.attention.qsa_fa_fallback import flash_attn_varlen_func

        return flash_attn_varlen_func
    return _sparkctl_stock_resolve_flash_attn_varlen_func(*args, **kwargs)
'''


def main(path):
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    if MARKER in source:
        return 0
    if not re.search(r"^def _resolve_flash_attn_varlen_func\(", source, re.MULTILINE):
        sys.stderr.write(f"{path}: _resolve_flash_attn_varlen_func not found; the base image changed, update the patch\n")
        return 1
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(WRAPPER)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
