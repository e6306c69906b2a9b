# SPDX-License-Identifier: Apache-2.0
"""Writes a few small valid inputs per fuzz target, so libFuzzer starts from real files rather
than from nothing (a record file is at least two 4096-byte pages, which random bytes never find).

Usage: make_seeds.py OUT_DIR   (writes OUT_DIR/<target>/<seed>)
"""
import os
import struct
import sys


def idx_seeds():
    images = bytes([0, 0, 0x08, 3]) + struct.pack(">III", 2, 3, 2) + bytes(range(12))
    ints = bytes([0, 0, 0x0C, 1]) + struct.pack(">I", 2) + struct.pack(">ii", 7, -1)
    return {"images": images, "ints": ints}


def cifar_record(label_bytes, seed):
    return bytes(label_bytes) + bytes((seed + j) % 256 for j in range(3072))


def cifar_seeds():
    return {"cifar10": cifar_record([3], 1) + cifar_record([9], 2),
            "cifar100": cifar_record([4, 23], 3)}


def npy(major, dict_text, data):
    length_bytes = 2 if major == 1 else 4
    header = dict_text
    while (8 + length_bytes + len(header) + 1) % 64:
        header += " "
    header += "\n"
    length = struct.pack("<H" if major == 1 else "<I", len(header))
    return b"\x93NUMPY" + bytes([major, 0]) + length + header.encode() + data


def npy_seeds():
    return {
        "images_v1": npy(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2, 3), }",
                         bytes(range(12))),
        "nchw_v1": npy(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (1, 3, 2, 2), }",
                       bytes(range(12))),
        "labels_v2": npy(2, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
                         struct.pack("<qqq", 0, 5, 2)),
        "labels_v3_be": npy(3, "{'descr': '>u2', 'fortran_order': False, 'shape': (2,), }",
                            struct.pack(">HH", 1, 300)),
    }


def record_file(count, c, h, w, classes, page=4096):
    pixel_bytes = c * h * w
    slot = (8 + pixel_bytes + 7) // 8 * 8
    per_page = page // slot
    pages = (count + per_page - 1) // per_page
    index_offset = page * (1 + pages)
    header = b"SATREC01" + struct.pack("<IIQIIIIQ", 1, page, count, c, h, w, classes, index_offset)
    out = bytearray(header.ljust(page, b"\0"))
    labels = [i % classes for i in range(count)]
    for p in range(pages):
        body = bytearray(page)
        for s in range(per_page):
            i = p * per_page + s
            if i >= count:
                break
            body[s * slot:s * slot + 8] = struct.pack("<q", labels[i])
            body[s * slot + 8:s * slot + 8 + pixel_bytes] = bytes((i + j) % 256
                                                                  for j in range(pixel_bytes))
        out += body
    out += struct.pack("<%dq" % count, *labels)
    return bytes(out)


def record_seeds():
    return {"small": record_file(5, 1, 4, 4, 2), "two_pages": record_file(30, 3, 8, 8, 4)}


def main():
    out = sys.argv[1]
    for target, seeds in (("idx", idx_seeds()), ("cifar", cifar_seeds()), ("npy", npy_seeds()),
                          ("record", record_seeds())):
        os.makedirs(os.path.join(out, target), exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(out, target, name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
