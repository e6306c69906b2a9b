# SPDX-License-Identifier: Apache-2.0
"""Writes a few small valid inputs per fuzz target, so libFuzzer starts from real files rather
than from nothing (a record file is at least two 4096-byte pages, which random bytes never find).

Usage: make_seeds.py OUT_DIR   (writes OUT_DIR/<target>/<seed>)
"""
import os
import struct
import sys
import zlib

# Small JPEGs (made once with Pillow, quality 50): gray, progressive RGB, 4:2:0 RGB.
JPEG_SEEDS = {
    "gray8x8": bytes.fromhex(
        "ffd8ffe000104a46494600010100000100010000ffdb004300100b0c0e0c0a100e0d0e1211101318281a1816"
        "16183123251d283a333d3c3933383740485c4e404457453738506d51575f626768673e4d71797064785c6567"
        "63ffc0000b080008000801011100ffc4001f0000010501010101010100000000000000000102030405060708"
        "090a0bffc400b5100002010303020403050504040000017d0102030004110512213141061351610722711432"
        "8191a1082342b1c11552d1f02433627282090a161718191a25262728292a3435363738393a43444546474849"
        "4a535455565758595a636465666768696a737475767778797a838485868788898a92939495969798999aa2a3"
        "a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9ea"
        "f1f2f3f4f5f6f7f8f9faffda0008010100003f00c9d12cfeef15ffd9"
    ),
    "rgb16x8_progressive": bytes.fromhex(
        "ffd8ffe000104a46494600010100000100010000ffdb004300100b0c0e0c0a100e0d0e1211101318281a1816"
        "16183123251d283a333d3c3933383740485c4e404457453738506d51575f626768673e4d71797064785c6567"
        "63ffdb0043011112121815182f1a1a2f63423842636363636363636363636363636363636363636363636363"
        "6363636363636363636363636363636363636363636363636363ffc200110800080010030122000211010311"
        "01ffc4001500010100000000000000000000000000000004ffc4001401010000000000000000000000000000"
        "0003ffda000c0301000210031000000196b04fffc400161000030000000000000000000000000000000203ff"
        "da0008010100010502580b03ffc400161101010100000000000000000000000000030002ffda000801030101"
        "3f0105d5ffc400161101010100000000000000000000000000010002ffda0008010201013f0134dfffc40014"
        "100100000000000000000000000000000010ffda0008010100063f023fffc400151001010000000000000000"
        "0000000000000061ffda0008010100013f218a2fffda000c030100020003000000107fffc400151101010000"
        "0000000000000000000000002100ffda0008010301013f103b7fffc400141101000000000000000000000000"
        "00000000ffda0008010201013f106fffc4001510010100000000000000000000000000000031ffda00080101"
        "00013f109327ffd9"
    ),
    "rgb8x8_420": bytes.fromhex(
        "ffd8ffe000104a46494600010100000100010000ffdb004300100b0c0e0c0a100e0d0e1211101318281a1816"
        "16183123251d283a333d3c3933383740485c4e404457453738506d51575f626768673e4d71797064785c6567"
        "63ffdb0043011112121815182f1a1a2f63423842636363636363636363636363636363636363636363636363"
        "6363636363636363636363636363636363636363636363636363ffc000110800080008030122000211010311"
        "01ffc4001f0000010501010101010100000000000000000102030405060708090a0bffc400b5100002010303"
        "020403050504040000017d01020300041105122131410613516107227114328191a1082342b1c11552d1f024"
        "33627282090a161718191a25262728292a3435363738393a434445464748494a535455565758595a63646566"
        "6768696a737475767778797a838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7"
        "b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9faffc400"
        "1f0100030101010101010101010000000000000102030405060708090a0bffc400b511000201020404030407"
        "05040400010277000102031104052131061241510761711322328108144291a1b1c109233352f0156272d10a"
        "162434e125f11718191a262728292a35363738393a434445464748494a535455565758595a63646566676869"
        "6a737475767778797a82838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9"
        "bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae2e3e4e5e6e7e8e9eaf2f3f4f5f6f7f8f9faffda000c030100"
        "02110311003f00cbb6d07a7c94514571aab2382862eaf26e7fffd9"
    ),
}


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


def png(width, height, color_type, bit_depth, rows, interlace=0, extra=b""):
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, interlace)
    raw = b"".join(b"\0" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra +
            png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))


def image_seeds():
    seeds = dict(JPEG_SEEDS)
    seeds["gray_png"] = png(4, 3, 0, 8, [bytes((x * 60 + y) for x in range(4)) for y in range(3)])
    seeds["rgb_png"] = png(3, 2, 2, 8, [bytes(range(y, y + 9)) for y in range(2)])
    seeds["rgba16_png"] = png(2, 2, 6, 16, [bytes(range(16)), bytes(range(16, 32))])
    seeds["palette_png"] = png(4, 1, 3, 2, [bytes([0b00011011])],
                               extra=png_chunk(b"PLTE", bytes(range(12))))
    return seeds


def png_chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(
        ">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def main():
    out = sys.argv[1]
    for target, seeds in (("idx", idx_seeds()), ("cifar", cifar_seeds()), ("npy", npy_seeds()),
                          ("record", record_seeds()),
                          ("image", image_seeds())):
        os.makedirs(os.path.join(out, target), exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(out, target, name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
