"""Route QSA's varlen attention to the Triton fallback when the GPU is not sm_100-class.

Idempotent: a second run finds the marker and changes nothing. Exits non-zero when the
function it wraps is not found, so a base image that moved the code fails the build.
Leaves the file alone when the stock resolver already sends sm_121 (GB10) to a kernel of
SGLang's own, as the PyPI releases 0.5.20 to 0.5.23 do (docs/field-notes.md): wrapping
it would route GB10 around that kernel to this slower fallback."""

import ast
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


def dispatches_sm121_itself(source):
    """Whether the stock resolver calls is_sm121() itself (its own GB10 branch)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == "_resolve_flash_attn_varlen_func":
            called = (getattr(call.func, "id", getattr(call.func, "attr", "")) for call in ast.walk(node)
                      if isinstance(call, ast.Call))
            return "is_sm121" in called
    return False


def main(path):
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    if MARKER in source:
        return 0
    if not re.search(r"^def _resolve_flash_attn_varlen_func\(", source, re.MULTILINE):
        sys.stderr.write(f"{path}: _resolve_flash_attn_varlen_func not found; "
                         "the base image changed, update the patch\n")
        return 1
    if dispatches_sm121_itself(source):
        sys.stdout.write(f"{path}: this SGLang already routes sm_121 to its own kernel; not patched\n")
        return 0
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(WRAPPER)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
