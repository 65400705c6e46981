#!/usr/bin/env python3
"""Writes seeds for fuzz_cfa from real objects' unwind tables.

    tests/fuzz/cfa_seeds.py tests/fuzz/corpus/fuzz_cfa /bin/true /bin/ls \
        /lib/x86_64-linux-gnu/libc.so.6 /lib/x86_64-linux-gnu/libstdc++.so.6

An input of fuzz_cfa (see fuzz_cfa.c) is a pc (relative to .eh_frame_hdr,
int64), the offset of .eh_frame_hdr in the segment (uint32), then the segment.
Per object: the whole .eh_frame_hdr..end of .eh_frame when small, and compact
seeds of one FDE each: a one-entry .eh_frame_hdr, the FDE's CIE and the FDE,
with the CIE pointer rewritten, for FDEs chosen across the object (the longest
instruction streams first: those reach the most of the interpreter).
"""
import os
import struct
import sys

WHOLE_MAX = 8192
PER_OBJECT = 6


def sections(data):
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    stro = hdrs[shstrndx][4]
    out = {}
    for h in hdrs:
        name = data[stro + h[0]:data.index(b"\0", stro + h[0])].decode()
        out[name] = (h[3], h[4], h[5])  # addr, offset, size
    return out


def uleb(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if not c & 0x80:
            return v, i


def seed(pc_off, hdr_off, seg):
    return struct.pack("<qI", pc_off, hdr_off) + seg


def fde_seeds(data, secs):
    haddr, hoff, _ = secs[".eh_frame_hdr"]
    eaddr, eoff, esize = secs[".eh_frame"]
    at = lambda a: data[a - eaddr + eoff:]  # bytes of .eh_frame at a vaddr
    count, = struct.unpack_from("<I", data, hoff + 8)
    fdes = []
    for k in range(count):
        _, rel = struct.unpack_from("<ii", data, hoff + 12 + 8 * k)
        fa = haddr + rel
        flen, cptr = struct.unpack_from("<II", at(fa))
        ca = fa + 4 - cptr
        clen, = struct.unpack_from("<I", at(ca))
        cie = bytes(at(ca)[:4 + clen])
        aug_at = 9
        aug = cie[aug_at:cie.index(b"\0", aug_at)]
        if aug != b"zR":  # keep the pc rewrite simple; zPLR comes whole
            continue
        i = aug_at + len(aug) + 1
        _, i = uleb(cie, i)  # code alignment
        _, i = uleb(cie, i)  # data alignment (sleb, same length)
        i += 1  # return address register
        _, i = uleb(cie, i)
        if cie[i] != 0x1B:  # pcrel sdata4
            continue
        fdes.append((flen, fa, cie, bytes(at(fa)[:4 + flen])))
    fdes.sort(key=lambda f: -f[0])
    chosen = fdes[:PER_OBJECT // 2] + fdes[len(fdes) // 3::max(1, len(fdes) // PER_OBJECT)][:PER_OBJECT // 2]
    for flen, fa, cie, fde in chosen:
        cie_at = 12 + 8  # after the header and its one entry
        fde_at = cie_at + len(cie)
        pc_begin, pc_range = struct.unpack_from("<iI", fde, 8)
        # pcrel: the field moves from fa + 8 to fde_at + 8
        start = fde_at + 8 + pc_begin
        fde = fde[:4] + struct.pack("<I", fde_at + 4 - cie_at) + fde[8:]
        hdr = struct.pack("<BBBBiI", 1, 0x1B, 0x03, 0x3B, cie_at - 4, 1)
        seg = hdr + struct.pack("<ii", start, fde_at) + cie + fde
        for pc in (start, start + pc_range // 2, start + pc_range - 1):
            yield pc, seed(pc, 0, seg)


def main():
    out = sys.argv[1]
    for path in sys.argv[2:]:
        data = open(path, "rb").read()
        secs = sections(data)
        base = os.path.basename(path).split(".")[0]
        haddr, hoff, hsize = secs[".eh_frame_hdr"]
        eaddr, eoff, esize = secs[".eh_frame"]
        seeds = []
        if eaddr + esize - haddr <= WHOLE_MAX:
            seg = data[hoff:eoff + esize]
            start, _ = struct.unpack_from("<ii", data, hoff + 12 + 8 * (hsize // 16))
            seeds.append(seed(start + 1, 0, seg))
        seeds += [s for _, s in fde_seeds(data, secs)]
        for n, s in enumerate(seeds):
            with open(os.path.join(out, "%s-%02d" % (base, n)), "wb") as f:
                f.write(s)
        print("%s: %d seeds" % (path, len(seeds)))


main()
