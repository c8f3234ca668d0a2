#!/usr/bin/env python3
"""Synthetic look-alikes of the sample files DeepCTR ships (criteo_sample.txt,
movielens_sample.txt, avazu_sample.txt), for psgraph's tests: the same
headers, and the same quirks a reader meets in them, with made-up values
(the real samples' data sets may not be redistributed with psgraph).

  criteo_sample.txt    label,I1..I13,C1..C26: counts written as floats
                       ("260.0"), negative ones, empty fields, 8-digit hex
                       categoricals (some empty)
  movielens_sample.txt user_id,movie_id,rating,timestamp,title,genres,gender,
                       age,occupation,zip: titles quoted by RFC 4180 where
                       they hold a comma or a quote ("Bridges of Madison
                       County, The (1995)"), genres joined by "|",
                       occupation 0 in some rows
  avazu_sample.txt     id,click,hour,C1,...,C21: ids up to 2^64-1 (past
                       int64), numeric-looking categoricals
  census-income.sample no header; fields after the first comma start with a
                       space (" Private"); the label " - 50000." or
                       " 50000+." in the last column

Deterministic (a fixed seed). Usage: samples.py OUTDIR [ROWS]
"""
import csv
import os
import random
import sys

GENRES = ["Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Drama",
          "Fantasy", "Horror", "Musical", "Romance", "Sci-Fi", "Thriller", "War"]
WORDS = ["Bridges", "Madison", "County", "Patriot", "Games", "Wood", "Liar", "Danger",
         "Clear", "Present", "Night", "Star", "River", "Home", "Alone"]


def criteo(rng, rows, out):
    with open(os.path.join(out, "criteo_sample.txt"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["label"] + ["I%d" % i for i in range(1, 14)] + ["C%d" % i for i in range(1, 27)])
        for r in range(rows):
            label = 1 if rng.random() < 0.3 else 0
            dense = []
            for j in range(13):
                if rng.random() < 0.3:
                    dense.append("")
                elif j == 1 and rng.random() < 0.2:
                    dense.append("-1")  # I2 holds negative counts
                else:
                    x = int(rng.expovariate(1 / (10 + 50 * j + 20 * label)))
                    dense.append(repr(float(x)))
            sparse = []
            for j in range(26):
                if rng.random() < 0.1:
                    sparse.append("")
                else:
                    # few distinct values a column, some more often clicked
                    v = rng.randrange(3 + j)
                    if label and rng.random() < 0.3:
                        v = 0
                    sparse.append("%08x" % ((j * 2654435761 + v * 40503) % 2**32))
            w.writerow([str(label)] + dense + sparse)


def movielens(rng, rows, out):
    with open(os.path.join(out, "movielens_sample.txt"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")  # quotes a field that needs it
        w.writerow(["user_id", "movie_id", "rating", "timestamp", "title", "genres", "gender", "age", "occupation", "zip"])
        for r in range(rows):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(1, 4)))
            kind = rng.random()
            if kind < 0.2:
                title = "%s, The (%d)" % (words, rng.randrange(1930, 2000))
            elif kind < 0.25:
                title = '%s "%s" (%d)' % (words, rng.choice(WORDS), rng.randrange(1930, 2000))
            else:
                title = "%s (%d)" % (words, rng.randrange(1930, 2000))
            genres = "|".join(rng.sample(GENRES, rng.randrange(1, 5)))
            w.writerow([rng.randrange(1, 6041), rng.randrange(1, 3953), rng.randrange(1, 6),
                        rng.randrange(956703932, 1046454590), title, genres, rng.choice("MF"),
                        rng.choice([1, 18, 25, 35, 45, 50, 56]), rng.randrange(0, 21),
                        "%05d" % rng.randrange(0, 100000)])


def avazu(rng, rows, out):
    with open(os.path.join(out, "avazu_sample.txt"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "click", "hour", "C1", "banner_pos", "site_id", "site_domain", "site_category",
                    "app_id", "app_domain", "app_category", "device_id", "device_ip", "device_model",
                    "device_type", "device_conn_type", "C14", "C15", "C16", "C17", "C18", "C19", "C20", "C21"])
        for r in range(rows):
            row = [rng.randrange(2**63, 2**64) if r % 2 else rng.randrange(0, 2**63), int(rng.random() < 0.2),
                   14102100 + rng.randrange(0, 24), rng.choice([1005, 1002, 1010]), rng.randrange(0, 2)]
            row += ["%08x" % rng.randrange(0, 2**32) if rng.random() < 0.3 else "1fbe01fe" for _ in range(9)]
            row += [rng.randrange(0, 6), rng.randrange(0, 3), rng.randrange(15000, 16000), 320, 50,
                    rng.randrange(1700, 1800), rng.randrange(0, 4), 35, rng.choice([-1, 100084]), 79]
            w.writerow(row)


def census(rng, rows, out):
    workers = ["Private", "Self-employed-not incorporated", "Not in universe", "Local government"]
    educations = ["High school graduate", "Some college but no degree", "Bachelors degree(BA AB BS)",
                  "Masters degree(MA MS MEng MEd MSW MBA)", "10th grade", "Children"]
    marital = ["Never married", "Married-civilian spouse present", "Divorced", "Widowed"]
    with open(os.path.join(out, "census-income.sample"), "w", newline="") as f:
        for r in range(rows):
            age = rng.randrange(0, 91)
            edu = rng.randrange(len(educations))
            rich = age > 25 and rng.random() < 0.05 + 0.08 * edu
            f.write(",".join([str(rng.randrange(1, 200000)), str(age), " " + rng.choice(workers),
                              str(rng.randrange(0, 1500) if rng.random() < 0.1 else 0), " " + educations[edu],
                              " " + rng.choice(marital), " " + rng.choice(["Male", "Female"]),
                              "%.2f" % rng.uniform(100, 5000), " 50000+." if rich else " - 50000."]) + "\n")


if __name__ == "__main__":
    out = sys.argv[1]
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    criteo(random.Random(1), rows, out)
    movielens(random.Random(2), rows, out)
    avazu(random.Random(3), rows, out)
    census(random.Random(4), rows, out)
