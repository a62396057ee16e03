#!/usr/bin/env python3
"""tools/iq_grids.py: write runtime/cpu/iq_grids_data.h, the IQ grids in
shoal's compact form, from the tables of a GGUF reference header.

Part: tools/ (run by hand, once; the output is committed). The grids are the
GGUF format's definition: the values are read from the header given, checked
against the value sets below, and stored as small indices:
  IQ2_XXS (256), IQ2_XS (512), IQ2_S (1024): 8 bytes in {8, 25, 43} ->
    8 two-bit indices, element j at bits 2j..2j+1 of a uint16;
  IQ3_XXS (256): 4 bytes in {4, 12, 20, 28, 36, 44, 52, 62},
  IQ3_S (512):   4 bytes in {1, 3, 5, ..., 15} ->
    4 three-bit indices, element j at bits 3j..3j+2 of a uint16;
  IQ1_S / IQ1_M (2048): 8 signed bytes in {-1, 0, 1} -> 8 two-bit indices
    (value + 1), as IQ2's.
runtime/cpu/iq_grids.c expands them to full tables once, at first use.

Usage: tools/iq_grids.py PATH/ggml-common.h > runtime/cpu/iq_grids_data.h
"""
import re
import sys

IQ2_VALUES = [8, 25, 43]
IQ3XXS_VALUES = [4, 12, 20, 28, 36, 44, 52, 62]
IQ3S_VALUES = [1, 3, 5, 7, 9, 11, 13, 15]
IQ1_VALUES = [-1, 0, 1]

# (reference table name, entries, bytes per entry, value set, shoal name)
GRIDS = [
    ("iq2xxs_grid", 256, 8, IQ2_VALUES, "iq2xxs"),
    ("iq2xs_grid", 512, 8, IQ2_VALUES, "iq2xs"),
    ("iq2s_grid", 1024, 8, IQ2_VALUES, "iq2s"),
    ("iq3xxs_grid", 256, 4, IQ3XXS_VALUES, "iq3xxs"),
    ("iq3s_grid", 512, 4, IQ3S_VALUES, "iq3s"),
    ("iq1s_grid", 2048, 8, IQ1_VALUES, "iq1s"),
]


def table(src, name):
    m = re.search(r"GGML_TABLE_BEGIN\(\w+,\s*" + name + r",[^)]*\)(.*?)GGML_TABLE_END", src, re.S)
    if not m:
        sys.exit("no table " + name)
    return [int(v, 16) for v in re.findall(r"0x[0-9a-fA-F]+", m.group(1))]


def main():
    src = open(sys.argv[1]).read()
    print("/*\n * runtime/cpu/iq_grids_data.h: the IQ grids in compact form, written by")
    print(" * tools/iq_grids.py (do not edit). The values are the GGUF format's")
    print(" * definition; see that script for the encoding. Included by iq_grids.c only.\n */")
    for ref, count, nbytes, values, name in GRIDS:
        entries = table(src, ref)
        if len(entries) != count:
            sys.exit("%s: %d entries, expected %d" % (ref, len(entries), count))
        bits = 2 if len(values) <= 4 else 3
        out = []
        for e in entries:
            code = 0
            for j in range(nbytes):
                b = (e >> (8 * j)) & 0xff
                if values[0] < 0 and b >= 128:
                    b -= 256
                if b not in values:
                    sys.exit("%s: byte %d not in the value set" % (ref, b))
                code |= values.index(b) << (bits * j)
            out.append(code)
        print("static const uint16_t iq_grids_%s_packed[%d] = {" % (name, count))
        for i in range(0, count, 12):
            print("    " + ", ".join("0x%04x" % c for c in out[i:i + 12]) + ",")
        print("};")
    # ksigns is not stored: entry i is i with bit 7 set when i has odd parity
    ks = [int(v) for v in re.search(r"ksigns_iq2xs, 128\)(.*?)GGML_TABLE_END", src, re.S).group(1).replace(",", " ").split()]
    for i, v in enumerate(ks):
        if v != i | ((bin(i).count("1") & 1) << 7):
            sys.exit("ksigns: entry %d is not the parity rule" % i)


main()
