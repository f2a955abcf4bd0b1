# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Whether a .safetensors file's header is sound for its size, and which shards a
*.safetensors.index.json names; only the header is read, never the tensors.

The format is checked from its public description: an 8-byte little-endian header length N,
N bytes of UTF-8 JSON starting with '{', then the data section; every tensor names a dtype, a
shape and data_offsets [begin, end] relative to the data section, the offsets tile the data
section with no gap or overlap, and each span is exactly dtype bits x shape. Only the Python
standard library is used (the nodes have nothing else for Ansible).
"""

from __future__ import annotations

import json
import posixpath

INDEX_SUFFIX = ".safetensors.index.json"
SAFETENSORS_SUFFIX = ".safetensors"

# The reference implementation refuses headers above 100 MB; a length beyond that is garbage
# (e.g. a zero-filled or foreign file), and reading it would only waste memory.
MAX_HEADER_BYTES = 100_000_000
DTYPE_BITS = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}


# --- safetensors ---------------------------------------------------------------------------------


def _reject_duplicate_keys(pairs):
    result = {}
    for key, value in pairs:
        if key in result:
            raise ValueError("duplicate key %r" % key)
        result[key] = value
    return result


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _shape_text(shape):
    return "[%s]" % ", ".join(str(dim) for dim in shape)


def safetensors_header_problem(header_bytes, data_len):
    """Return None when the JSON header fits a data section of data_len bytes, else what is wrong."""
    if not header_bytes.startswith(b"{"):
        return "header does not start with '{' (first bytes %r); not a safetensors file" % header_bytes[:8]
    try:
        header = json.loads(header_bytes.decode("utf-8"), object_pairs_hook=_reject_duplicate_keys)
    except UnicodeDecodeError:
        return "header is not UTF-8"
    except ValueError as exc:
        return "header is not valid JSON: %s" % exc
    if not isinstance(header, dict):
        return "header is not a JSON object"
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict) and all(isinstance(value, str) for value in metadata.values())):
        return "__metadata__ must map strings to strings"
    spans = []
    for name, info in header.items():
        if not isinstance(info, dict):
            return "tensor %r: entry is not an object" % name
        dtype = info.get("dtype")
        shape = info.get("shape")
        offsets = info.get("data_offsets")
        if dtype not in DTYPE_BITS:
            return "tensor %r: unknown dtype %r" % (name, dtype)
        if not isinstance(shape, list) or not all(_is_int(dim) and dim >= 0 for dim in shape):
            return "tensor %r: shape %r is not a list of non-negative integers" % (name, shape)
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(value) for value in offsets)):
            return "tensor %r: data_offsets %r is not [begin, end]" % (name, offsets)
        begin, end = offsets
        if begin < 0 or end < begin:
            return "tensor %r: data_offsets [%d, %d] are not 0 <= begin <= end" % (name, begin, end)
        if end > data_len:
            return "tensor %r: data_offsets [%d, %d] end past the %d-byte data section (truncated file?)" % (name, begin, end, data_len)
        elements = 1
        for dim in shape:
            elements *= dim
        bits = elements * DTYPE_BITS[dtype]
        if bits % 8:
            return "tensor %r: %s x %s is not a whole number of bytes" % (name, dtype, _shape_text(shape))
        if end - begin != bits // 8:
            return "tensor %r: data_offsets [%d, %d] span %d bytes, %s x %s needs %d" % (
                name,
                begin,
                end,
                end - begin,
                dtype,
                _shape_text(shape),
                bits // 8,
            )
        spans.append((begin, end, name))
    position = 0
    for begin, end, name in sorted(spans):
        if begin > position:
            return "%d bytes at data offset %d belong to no tensor (gap before %r)" % (begin - position, position, name)
        if begin < position:
            return "tensor %r at data offset %d overlaps the previous tensor, which ends at %d" % (name, begin, position)
        position = end
    if position != data_len:
        return "tensors cover %d bytes but the data section has %d (%d trailing bytes)" % (position, data_len, data_len - position)
    return None


def safetensors_file_problem(path, size):
    """Read only the header of a .safetensors file of size bytes; None when sound, else what is wrong."""
    if size < 8:
        return "file is %d bytes, shorter than the 8-byte header length" % size
    try:
        with open(path, "rb") as handle:
            header_len = int.from_bytes(handle.read(8), "little")
            if header_len > MAX_HEADER_BYTES:
                return "header length %d is over %d bytes; not a safetensors file" % (header_len, MAX_HEADER_BYTES)
            if 8 + header_len > size:
                return "header length %d runs past the end of the %d-byte file (truncated?)" % (header_len, size)
            header_bytes = handle.read(header_len)
    except OSError as exc:
        return "cannot read: %s" % (exc.strerror or exc)
    if len(header_bytes) != header_len:
        return "file shrank while its header was read"
    return safetensors_header_problem(header_bytes, size - 8 - header_len)


# --- model.safetensors.index.json ----------------------------------------------------------------


def index_shards(index_bytes):
    """Return the deduplicated weight_map values of an index file, or raise ValueError saying why not."""
    try:
        index = json.loads(index_bytes.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError("not valid JSON: %s" % exc) from exc
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError("has no weight_map")
    shards = set()
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or not shard.endswith(SAFETENSORS_SUFFIX) or shard.startswith("/") or "\\" in shard:
            raise ValueError("weight_map[%r] = %r is not a .safetensors file name" % (tensor, shard))
        normalized = posixpath.normpath(shard)
        if normalized.startswith("../"):
            raise ValueError("weight_map[%r] = %r points outside the checkpoint" % (tensor, shard))
        shards.add(normalized)
    return sorted(shards)
