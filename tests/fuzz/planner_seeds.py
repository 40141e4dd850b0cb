#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_planner (tests/fuzz/corpus/planner) from two sources:

  unit-*    the filters and read commands of the planner's unit tests
            (tests/unit/test_planner.c: the bound, route and point-read tables, the
            property tests' filters, the q of every update and delete statement),
            taken from the C file through the preprocessor so that its macros (IN,
            FIND(...), AGGREGATE(...)) expand, each followed by two documents whose
            time fields lie around the tests' horizon;
  driver-*  the filters real drivers sent (corpus/match, captured by
            capture_corpus.py), which already have the fuzzer's layout: filter || document.

Usage: planner_seeds.py [--out tests/fuzz/corpus/planner]   (replaces that directory)
Needs cc and /usr/bin/python3 with pymongo.
"""
import argparse
import hashlib
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import bson
from bson import json_util

REPOSITORY = Path(__file__).resolve().parents[2]
UNIT_TEST = REPOSITORY / "tests" / "unit" / "test_planner.c"
MATCH_CORPUS = REPOSITORY / "tests" / "fuzz" / "corpus" / "match"

# The case tables whose strings are filters or commands.
TABLE = re.compile(r"\b(bound_case_t|route_case_t|point_case_t|write_case_t)\s+cases\[\]\s*=\s*\{(.*?)\};"
                   r"|\bconst\s+filters\[\]\s*=\s*\{(.*?)\};|\bconst\s+unpinned\[\]\s*=\s*\{(.*?)\};", re.S)
STRINGS = re.compile(r'(?:"(?:[^"\\\n]|\\.)*"\s*)+')
LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')

# Documents around the unit tests' horizon (2026-10-01T00:00:00Z); a seed carries two.
DOCUMENTS = [
    '{"_id": 1, "createdAt": {"$date": "2026-11-01T00:00:00Z"}, "x": 1, "status": "A"}',
    '{"_id": 2, "createdAt": {"$date": "2026-09-30T23:59:59.999Z"}, "x": 0}',
    '{"_id": 3, "createdAt": [{"$date": "2026-09-01T00:00:00Z"}, {"$date": "2026-10-01T00:00:00Z"}], '
    '"meta": {"ts": {"$date": "2026-11-01T00:00:00Z"}}}',
    '{"_id": {"$numberLong": "5"}, "createdAt": null, "meta": [{"ts": {"$date": "2026-09-01T00:00:00Z"}}]}',
    '{"_id": "k", "createdAt": "2026-11-01", "sku": "A"}',
]


class Pairs(list):
    """A JSON object as its (key, value) pairs: order and repeated keys kept."""


def object_pairs(pairs):
    # Extended JSON ({"$date": ...}, {"$oid": ...}) becomes its BSON value; other
    # objects, operator documents included, stay pairs.
    if pairs and pairs[0][0].startswith("$"):
        plain = [(key, dict(value) if isinstance(value, Pairs) else value) for key, value in pairs]
        converted = json_util.object_pairs_hook(plain)
        if not isinstance(converted, dict):
            return converted
    # The tests write $type, $ref, $id as %type... (libbson would read them as
    # extended JSON); they mean the operators.
    return Pairs(("$" + key[1:] if key.startswith("%") else key, value) for key, value in pairs)


def parse(text):
    """The tests' JSON (single quotes for double), or None when the string is not JSON."""
    try:
        value = json_util.json.loads(text.replace("'", '"'), object_pairs_hook=object_pairs)
    except ValueError:
        return None
    return value if isinstance(value, Pairs) else None


def encode_element(key, value):
    name = key.encode() + b"\0"
    if isinstance(value, Pairs):
        return b"\x03" + name + encode_document(value)
    if isinstance(value, list):
        return b"\x04" + name + encode_document([(str(i), item) for i, item in enumerate(value)])
    return bson.encode({key: value})[4:-1]


def encode_document(pairs):
    body = b"".join(encode_element(key, value) for key, value in pairs)
    return struct.pack("<i", len(body) + 5) + body + b"\0"


def preprocessed_unit_test():
    """test_planner.c with its own macros expanded (its #includes left out)."""
    source = "".join(line for line in UNIT_TEST.read_text().splitlines(True)
                     if not line.lstrip().startswith("#include"))
    return subprocess.run(["cc", "-E", "-P", "-x", "c", "-"], input=source.encode(), check=True,
                          stdout=subprocess.PIPE).stdout.decode()


def unit_test_inputs():
    """(table, document) for every filter or command string of the case tables."""
    for match in TABLE.finditer(preprocessed_unit_test()):
        table = match.group(1) or "filters"
        body = match.group(2) or match.group(3) or match.group(4)
        for strings in STRINGS.finditer(body):
            text = "".join(part.replace('\\"', '"').replace("\\\\", "\\")
                           for part in LITERAL.findall(strings.group(0)))
            document = parse(text)
            if document is None:
                continue
            if table == "write_case_t":
                # Writes are planned around their statements' filters.
                for key, statements in document:
                    if key in ("updates", "deletes") and isinstance(statements, list):
                        for statement in statements:
                            for field, value in statement if isinstance(statement, Pairs) else ():
                                if field == "q" and isinstance(value, Pairs):
                                    yield "write-q", value
            else:
                yield table.replace("_case_t", ""), document


def write(out, name, data, seen):
    digest = hashlib.sha1(data).hexdigest()
    if digest in seen:
        return
    seen.add(digest)
    (out / ("%s-%s" % (name, digest[:16]))).write_bytes(data)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(REPOSITORY / "tests" / "fuzz" / "corpus" / "planner"))
    out = Path(parser.parse_args().out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    documents = [encode_document(parse(text)) for text in DOCUMENTS]
    seen = set()
    count = 0
    for count, (table, document) in enumerate(unit_test_inputs(), 1):
        pair = documents[count % len(documents)] + documents[(count + 2) % len(documents)]
        write(out, "unit-" + table, encode_document(document) + pair, seen)
    unit_seeds = len(seen)
    for path in sorted(MATCH_CORPUS.iterdir()):
        if "-projection-" not in path.name:  # projections are not filters
            write(out, "driver-" + path.name.rsplit("-", 1)[0], path.read_bytes(), seen)
    print("%d unit-test seeds (from %d strings), %d driver seeds in %s"
          % (unit_seeds, count, len(seen) - unit_seeds, out))


if __name__ == "__main__":
    sys.exit(main())
