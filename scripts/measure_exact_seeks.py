"""What reading keys that are not there costs beside deleted entries, a
measurement, not a test. Run by hand, once per build, and report:

    python3 scripts/measure_exact_seeks.py [--binary build/thermocline] [--marks 100000]

One `thermocline store`, a collection shaped like the feeder's marks (_id
{ns, id, op}), of which the oldest 90% are then deleted at once, as the feeder's
clean deletes done marks. Then, before the store has written those deletes out,
finds of {_id: {$in: [400 keys]}}, as the feeder reads its batch's marks: keys in
the deleted range (none found), and keys still there. For each: milliseconds per
find (median and worst of 20) and the keys examined (explain)."""
import argparse
import statistics
import tempfile
import time

from measure_support import use_binary

BATCH = 400
ROUNDS = 20


def mark_id(number):
    return {"ns": "shop.orders", "id": number, "op": "warm"}


def time_finds(marks, numbers):
    asked = {"_id": {"$in": [mark_id(n) for n in numbers]}}
    timings = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        found = len(list(marks.find(asked)))
        timings.append((time.perf_counter() - started) * 1000)
    keys = marks.find(asked).explain()["executionStats"]["totalKeysExamined"]
    return found, statistics.median(timings), max(timings), keys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="build/thermocline")
    parser.add_argument("--marks", type=int, default=100000)
    arguments = parser.parse_args()
    use_binary(arguments.binary)
    from conftest import StoreProcess
    from pymongo import MongoClient
    store = StoreProcess(tempfile.mkdtemp()).start()
    try:
        client = MongoClient(store.uri)
        marks = client.thermocline.workerWrites
        for start in range(0, arguments.marks, 10000):
            marks.insert_many([{"_id": mark_id(n), "state": "done"}
                               for n in range(start, min(start + 10000, arguments.marks))])
        deleted = arguments.marks * 9 // 10
        started = time.perf_counter()
        marks.delete_many({"_id.id": {"$lt": deleted}})
        print("deleted %d of %d marks in %.0f ms" % (deleted, arguments.marks, (time.perf_counter() - started) * 1000))
        step = max(1, deleted // BATCH)
        for label, numbers in (("missing, among deleted", range(0, deleted, step)[:BATCH]),
                               ("present", range(deleted, arguments.marks)[:BATCH])):
            found, median, worst, keys = time_finds(marks, numbers)
            print("%-24s found %3d  %8.2f ms median  %8.2f ms worst  keys examined %d" %
                  (label, found, median, worst, keys))
        client.close()
    finally:
        store.stop()


if __name__ == "__main__":
    main()
