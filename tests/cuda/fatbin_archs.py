#!/usr/bin/env python3
"""List the GPU code in a library's fat binaries and check the CUDA
plugin's promise: machine code (ELF) for every architecture named on the
command line and PTX for the last, so newer GPUs can JIT it.

usage: fatbin_archs.py LIB 80 90   (exit 0 if sm_80 and sm_90 ELF and sm_90 PTX are there)

Layout (fatbinary.h): a 16-byte header (magic 0xBA55ED50, u16 version,
u16 header size, u64 size of the entries), then entries: u16 kind (1 PTX,
2 ELF), u16, u32 entry header size, u64 payload size, ..., u32 arch at
offset 28; the next entry follows the payload.
"""
import struct
import sys

MAGIC = 0xBA55ED50


def entries(blob):
    at = blob.find(struct.pack("<I", MAGIC))
    while at >= 0:
        _, _, hsize, total = struct.unpack_from("<IHHQ", blob, at)
        pos, end = at + hsize, at + hsize + total
        while pos + 32 <= end:
            kind, _, ehsize, size = struct.unpack_from("<HHIQ", blob, pos)
            arch = struct.unpack_from("<I", blob, pos + 28)[0]
            if ehsize == 0:
                break
            yield {1: "PTX", 2: "ELF"}.get(kind, f"kind{kind}"), arch
            pos += ehsize + size
        at = blob.find(struct.pack("<I", MAGIC), max(end, at + 4))


def main():
    lib, archs = sys.argv[1], [int(a) for a in sys.argv[2:]]
    with open(lib, "rb") as f:
        blob = f.read()
    found = set(entries(blob))
    print("fat binary entries:", ", ".join(f"{k} sm_{a}" for k, a in sorted(found)))
    want = {("ELF", a) for a in archs} | {("PTX", archs[-1])}
    missing = want - found
    if missing:
        print("missing:", ", ".join(f"{k} sm_{a}" for k, a in sorted(missing)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
