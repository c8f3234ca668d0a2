#!/usr/bin/env python3
"""An independent TFRecord writer for psgraph's tests: pure Python, no
TensorFlow and no psgraph code.

TFRecord framing: uint64 length (little-endian), masked CRC-32C of those 8
bytes, the record, masked CRC-32C of the record; masked = ((crc >> 15) |
(crc << 17)) + 0xa282ead8 mod 2^32. Each record a tf.Example protocol
buffer encoded by hand in the wire format:

  Example   { Features features = 1; }
  Features  { map<string, Feature> feature = 1; }   (entries: key = 1, value = 2)
  Feature   { oneof { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
  BytesList { repeated bytes value = 1; }
  FloatList { repeated float value = 1 [packed]; }
  Int64List { repeated int64 value = 1 [packed]; }

Usage:
  write_tfrecord.py criteo CSV OUTDIR   DeepCTR's gen_tfrecords.py layout for its
      Criteo sample, after run_classification_criteo.py's preprocessing: sparse
      features C1..C26 filled with "-1" and label-encoded (each column's sorted
      distinct values numbered from 0) as int64_list, dense I1..I13 filled with 0
      and min-max scaled to [0, 1] as float_list, the label as float_list. Writes
      OUTDIR/criteo.tfrecords, OUTDIR/criteo.tfrecords.gz (the same, gzipped) and
      OUTDIR/criteo_encoded.csv, the CSV the records were made from.
  write_tfrecord.py movielens CSV OUTDIR   MovieLens rows with genres as a
      bytes_list of several values, every third record's features in reverse
      order: OUTDIR/movielens.tfrecords.
  write_tfrecord.py tsv TSV N OUT   psgraph gen criteo's TSV as tf.Examples
      (its first 8192 rows repeated to N), for the benchmark of the formats.
  write_tfrecord.py big N OUT   N synthetic Criteo-like rows (label, I1..I13
      int64, C1..C26 bytes; row i is row i mod 1024) for the bounded-memory test
      and the benchmark.
"""
import csv
import gzip
import os
import struct
import sys

_table = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    _table.append(c)
# Slicing by 4: _tables[k][b] is the CRC register after byte b and k
# zero bytes, so four bytes take one step: the same bytes out, the "tsv"
# kind's 5,000 rows in 1.32 s of CPU (1.54 s a byte at a time), "big"
# 60,000 in 0.48 s (0.67 s).
_tables = [_table]
for _ in range(3):
    _tables.append([(c >> 8) ^ _table[c & 0xFF] for c in _tables[-1]])
_t0, _t1, _t2, _t3 = _tables


def crc32c(data):
    c = 0xFFFFFFFF
    n = len(data) - len(data) % 4
    for (w,) in struct.iter_unpack("<I", data[:n]):
        c ^= w
        c = _t3[c & 0xFF] ^ _t2[(c >> 8) & 0xFF] ^ _t1[(c >> 16) & 0xFF] ^ _t0[c >> 24]
    for b in data[n:]:
        c = _t0[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def varint(n):
    n &= 0xFFFFFFFFFFFFFFFF  # int64 as two's complement
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, payload):  # a length-delimited field
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def bytes_feature(values):
    return field(1, b"".join(field(1, v) for v in values))


def float_feature(values):
    return field(2, field(1, b"".join(struct.pack("<f", v) for v in values)))


def int64_feature(values):
    return field(3, field(1, b"".join(varint(v) for v in values)))


def example(features):
    entries = b"".join(field(1, field(1, k.encode()) + field(2, f)) for k, f in features)
    return field(1, entries)


def frame(rec):
    n = struct.pack("<Q", len(rec))
    return n + struct.pack("<I", masked(n)) + rec + struct.pack("<I", masked(rec))


def criteo(src, out):
    with open(src, newline="") as f:
        rows = list(csv.DictReader(f))
    dense = ["I%d" % i for i in range(1, 14)]
    sparse = ["C%d" % i for i in range(1, 27)]
    for r in rows:
        for c in sparse:
            r[c] = r[c] if r[c] != "" else "-1"
        for c in dense:
            r[c] = float(r[c]) if r[c] != "" else 0.0
        r["label"] = float(r["label"])
    for c in dense:
        lo, hi = min(r[c] for r in rows), max(r[c] for r in rows)
        for r in rows:
            r[c] = (r[c] - lo) / (hi - lo) if hi > lo else 0.0
    for c in sparse:
        codes = {v: i for i, v in enumerate(sorted({r[c] for r in rows}))}
        for r in rows:
            r[c] = codes[r[c]]
    recs = []
    for r in rows:
        feats = [(c, int64_feature([r[c]])) for c in sparse]
        feats += [(c, float_feature([r[c]])) for c in dense]
        feats.append(("label", float_feature([r["label"]])))
        recs.append(frame(example(feats)))
    with open(os.path.join(out, "criteo.tfrecords"), "wb") as f:
        f.write(b"".join(recs))
    with gzip.GzipFile(os.path.join(out, "criteo.tfrecords.gz"), "wb", mtime=0) as f:  # the same bytes every run
        f.write(b"".join(recs))
    with open(os.path.join(out, "criteo_encoded.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["label"] + dense + sparse)
        for r in rows:
            w.writerow([repr(r["label"])] + [repr(r[c]) for c in dense] + [r[c] for c in sparse])


def movielens(src, out):
    with open(src, newline="") as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(out, "movielens.tfrecords"), "wb") as f:
        for i, r in enumerate(rows):
            feats = [
                ("user_id", int64_feature([int(r["user_id"])])),
                ("movie_id", int64_feature([int(r["movie_id"])])),
                ("rating", float_feature([float(r["rating"])])),
                ("title", bytes_feature([r["title"].encode()])),
                ("genres", bytes_feature([g.encode() for g in r["genres"].split("|")])),
            ]
            if i % 3 == 1:  # a map's entries in any order: a reader may not rely on one
                feats.reverse()
            f.write(frame(example(feats)))


def big(n, out):
    # 1024 distinct records, repeated: row i is record i % 1024 (pure
    # Python's CRC-32C is slow: 4096 took 1.7 s of CPU; the reader sees a
    # file of n rows all the same)
    recs = []
    for i in range(min(n, 1024)):
        feats = [("label", int64_feature([i % 2]))]
        feats += [("I%d" % j, int64_feature([(i * j) % 1000])) for j in range(1, 14)]
        feats += [("C%d" % j, bytes_feature([("%08x" % ((i * 2654435761 + j) % 4294967296)).encode()])) for j in range(1, 27)]
        recs.append(frame(example(feats)))
    with open(out, "wb") as f:
        for i in range(n):
            f.write(recs[i % len(recs)])


def tsv(src, n, out):
    # psgraph gen criteo's TSV (label, I1..I13, C1..C26; no header) as
    # tf.Examples: label and I* int64_list (an empty field: no feature), C*
    # bytes_list. Its first 8192 rows, repeated to n rows.
    names = ["label"] + ["I%d" % i for i in range(1, 14)] + ["C%d" % i for i in range(1, 27)]
    recs = []
    with open(src) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            feats = []
            for name, v in zip(names, fields):
                if name[0] == "C":
                    feats.append((name, bytes_feature([v.encode()])))
                elif v != "":
                    feats.append((name, int64_feature([int(v)])))
            recs.append(frame(example(feats)))
            if len(recs) == 8192:
                break
    with open(out, "wb") as f:
        for i in range(n):
            f.write(recs[i % len(recs)])


if __name__ == "__main__":
    kind = sys.argv[1]
    if kind == "criteo":
        criteo(sys.argv[2], sys.argv[3])
    elif kind == "movielens":
        movielens(sys.argv[2], sys.argv[3])
    elif kind == "tsv":
        tsv(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif kind == "big":
        big(int(sys.argv[2]), sys.argv[3])
    else:
        sys.exit("unknown kind " + kind)
