#!/usr/bin/env python3
"""png_stats.py PNG — decodes an 8-bit RGB/RGBA PNG (zlib + the five row filters, stdlib
only) and prints one line: "WIDTH HEIGHT DISTINCT_COLOURS INKED_FRACTION", the inked fraction
being the share of pixels that differ from the most common colour (the page's background).
test_report_browser.c reads it to tell a rendered report from a blank page."""
import struct
import sys
import zlib


def main():
    data = open(sys.argv[1], "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit("png_stats: %s is not a PNG" % sys.argv[1])
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            if depth != 8 or ctype not in (2, 6):
                sys.exit("png_stats: only 8-bit RGB/RGBA (got depth %d, colour type %d)" % (depth, ctype))
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    counts = {}
    for y in range(h):
        f, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = row[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                row[i] = (row[i] + a) & 255
            elif f == 2:
                row[i] = (row[i] + b) & 255
            elif f == 3:
                row[i] = (row[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        for x in range(0, stride, bpp * 4):  # every 4th pixel: enough to count colours
            px = bytes(row[x:x + 3])
            counts[px] = counts.get(px, 0) + 1
        prev = row
    total = sum(counts.values())
    inked = 1 - max(counts.values()) / total if total else 0
    print("%d %d %d %.4f" % (w, h, len(counts), inked))


if __name__ == "__main__":
    main()
